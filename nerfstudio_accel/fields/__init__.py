"""Radiance fields exposing pre-activation outputs."""
