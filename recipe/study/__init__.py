"""The CPU studies: methods, driver, statistics, census, plots; ``testbed``: the controlled study."""
