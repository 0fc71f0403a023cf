//! Every program the agreement runs use must lower to the executor's plan without a GPU: generated programs
//! (seeds 0..300), the examples, and the two-rank case programs.

#[test]
fn generated_programs_lower() {
    let opt = cuorder_sim::gen::GenOptions::default();
    for seed in 0..300 {
        let p = cuorder_sim::gen::program(seed, &opt);
        if let Err(e) = cuorder_hw::lower::lower(&p) {
            panic!("gen-{seed}: {e:?}");
        }
    }
}

#[test]
fn examples_and_two_rank_cases_lower() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut n = 0;
    for dir in ["examples", "tests/cases"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "ron") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let p = cuorder_model::format::load("p", &text).unwrap();
            if p.ranks.len() > 2 {
                continue;
            }
            if let Err(e) = cuorder_hw::lower::lower(&p) {
                panic!("{}: {e:?}", path.display());
            }
            n += 1;
        }
    }
    assert!(n >= 20, "only {n} programs");
}
