"""The build pipeline: capture, lower, validate, report. ``run.build`` strings the stages together."""
