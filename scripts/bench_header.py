#!/usr/bin/env python3
"""The first line of a bench results file: the command (argv[1]), the machine (lscpu's
model name and CPU count), the commit and the date (UTC), as one JSON object."""
import datetime
import json
import subprocess
import sys

cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
machine = "; ".join(" ".join(l.split()) for l in cpu if l.startswith(("Model name", "CPU(s)")))
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                        text=True).stdout.strip()
print(json.dumps({"command": sys.argv[1], "machine": machine, "commit": commit,
                  "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}))
