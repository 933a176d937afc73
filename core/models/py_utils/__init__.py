"""Building blocks shared by the detector models."""
