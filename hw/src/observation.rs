//! The observation types live in the model crate (`cuorder_model::observation`) so that conformance checking
//! needs no GPU code; re-exported here for the executor.

pub use cuorder_model::observation::*;
