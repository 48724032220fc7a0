"""Fault injection on real processes: kills, full disks, dead workers, bad data, stop signals.

Each test breaks a real run on this machine and checks what the issue asks (a clean stop, nothing left,
nothing lost, a resume that continues where the run was); each writes a record that
``python -m tests.faults.table`` renders into docs/RELIABILITY.md. Marked ``faults``:
``bash scripts/test.sh -m faults``.
"""
