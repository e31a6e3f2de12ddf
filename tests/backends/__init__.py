"""Each backend's tests, beside its package: tests/backends/<name>/ for edgeship/backends/<name>/."""
