"""The service's routes, one router per concern: tiling, tables (and SoCs), health, metrics."""
