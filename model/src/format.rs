//! The RON surface format of programs, its SPMD expansion and validation (to be written).
