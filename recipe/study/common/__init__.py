"""What the testbed studies (v2, v3) share: their runs as driver jobs (``jobs``), the CPU-seconds
wrapper of real runs (``usage``), run folders -> CSVs (``collect``), the number formats and paired
comparisons of their reports (``reporting``), the docs' generated blocks (``docs``) and the testbed v2
spec that v3 continues (``testbeds``). No testbed study imports another; both import this.
"""
