"""The controller service: argv/env -> runtime + core. Room: services/controller."""
