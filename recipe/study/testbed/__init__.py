"""The controlled testbed: a small policy trained in the project on multi-digit addition (docs/STUDY_CPU.md)."""
