"""Policies, gates, signatures, the trail's record schema and the environment that decides a tree."""
