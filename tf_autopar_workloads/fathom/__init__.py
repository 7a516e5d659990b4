"""Fathom's eight archetypal models (Adolf et al., IISWC 2016), rewritten for Keras 3."""
