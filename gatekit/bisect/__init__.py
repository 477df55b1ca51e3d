"""`gate bisect`: which commit between GOOD and BAD changed the metric (see docs/bisect.md)."""
