//! main
fn main(){}
