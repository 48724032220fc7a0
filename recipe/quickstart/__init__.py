"""The quickstart: COPO (or GRPO) with verl's real trainer on CPU, followed step by step.

``run.py`` starts ``recipe.copo.main_copo --config-name copo_cpu`` and prints one line per step from
its ``metrics.jsonl``; ``report.py`` reads the metrics and compares validation before and after.
"""
