"""Renderers of findings: pure functions from a Finding to text."""
