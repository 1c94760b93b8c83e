"""The package version, in its own module so any module can say it without importing the package root
(which would make every module depend on the whole package)."""

__version__ = "0.1.0"
