"""Models the project prepares locally (nothing is downloaded at run time)."""
