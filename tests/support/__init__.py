"""Helpers shared by the test tiers (not tests themselves)."""
