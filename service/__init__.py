"""HTTP service: ``POST /tiling`` answers with tuned tiling parameters from the shipped tables."""
