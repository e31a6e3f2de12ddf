"""App bundles: one zip per platform (android, ios, jetson) with the chosen artifacts, their
metadata, a loading snippet and a manifest of every file's sha256; checking and safe extraction."""
from __future__ import annotations

from edgeship.bundle.archive import BundleCheck, extract_bundle, verify_bundle
from edgeship.bundle.make import Bundle, BundleInputs, make_bundle, make_bundles
from edgeship.bundle.platforms import PLATFORMS

__all__ = ["PLATFORMS", "Bundle", "BundleCheck", "BundleInputs", "extract_bundle", "make_bundle", "make_bundles",
           "verify_bundle"]
