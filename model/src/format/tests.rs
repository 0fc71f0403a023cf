//! Unit tests of the surface format: parsing, expansion, resolution and validation.
