"""Domain-free Trio building blocks. Nothing in this package imports hypertrain."""
