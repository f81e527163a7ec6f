"""rkv's math evaluation, as ``rkv eval math`` runs it: MATH-500 or AIME-style JSONL
problems, the R1 evaluation prompt and the grader (a port of the Qwen2.5-Math toolkit
that R-KV evaluates with)."""

from rkv._rkv import grade, r1_prompt, read_math_problems

__all__ = ["read_math_problems", "r1_prompt", "grade"]
