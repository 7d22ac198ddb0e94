"""The history jobs as `spark-submit` applications: each module here runs as a script (`spark-submit
.../jobs/audit.py --lake DIR --out DIR`), taking its master and resources from spark-submit."""
