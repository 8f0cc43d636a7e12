"""Devices and their profiles: finding a device that builds, the profile model, vendor and
architecture normalization, querying a live device, and profile files (shipped or user-written)."""
