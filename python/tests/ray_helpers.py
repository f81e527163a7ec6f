"""Importable by Ray's workers (the test puts this directory on their PYTHONPATH)."""

import os
from pathlib import Path

from rkv.ray import Generator


class DiesOnce(Generator):
    """A Generator whose first batch, in the whole job, kills its actor's process: the
    marker file makes the restarted actor (and every other) carry on."""

    def __init__(self, marker: str, **kwargs):
        super().__init__(**kwargs)
        self.marker = Path(marker)

    def __call__(self, batch):
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return super().__call__(batch)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        os._exit(1)
