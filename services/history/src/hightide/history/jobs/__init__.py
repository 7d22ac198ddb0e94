"""spark-submit entry points: each module here runs one job when submitted as a file."""
