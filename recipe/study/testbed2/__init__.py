"""The controlled CPU study on testbed v2 with the fast trainer (docs/STUDY_PLAN.md, docs/STUDY_CPU.md)."""
