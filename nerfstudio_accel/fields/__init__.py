"""Assembled radiance fields (hash grid + MLPs) that expose pre-activation outputs."""
