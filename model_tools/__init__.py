"""Tools built on the tiling model, one floor above it: the command line (``python -m model_tools``),
calibration of a SoC profile on measured times and its cross-validation, the plots, and the explorer's
explanations and pictures. ``tiling_model`` stays the model alone (tiling, validation, prediction, the
engine); the tuner and the service import what they need from here."""
