"""App bundles: one zip per platform (android, ios, jetson, web) with the chosen artifacts, their
metadata, a loading snippet (web: a demo page and an ES module) and a manifest of every file's
sha256; a web bundle also unpacked beside its zip; checking (a zip, or an unpacked folder in
place), signing (Ed25519 over the manifest, in a detached file) and safe extraction."""
from __future__ import annotations

from edgeship.bundle.archive import BundleCheck, extract_bundle, sign_bundle, verify_bundle
from edgeship.bundle.make import Bundle, BundleInputs, make_bundle, make_bundles
from edgeship.bundle.platforms import PLATFORMS
from edgeship.bundle.signing import Signed, generate_keypair

__all__ = ["PLATFORMS", "Bundle", "BundleCheck", "BundleInputs", "Signed", "extract_bundle", "generate_keypair",
           "make_bundle", "make_bundles", "sign_bundle", "verify_bundle"]
