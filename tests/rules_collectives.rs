//! Rule tests of the collectives NCCL >= 2.28 adds and of communicator splitting (C1, N8 in docs/semantics.md), in
//! the style of tests/rules.rs: each states the verdict the rule implies and checks the explorer reaches it.

mod common;
use common::{check_text, kinds};

/// A three-rank program (world communicator, stream s0, buffers a 4 KiB and b 12 KiB) with one SPMD main thread.
fn gpu3(ops: &str) -> String {
    format!(
        "Program(ranks: 3, streams: [Stream(\"s0\", NonBlocking), Stream(\"s1\", NonBlocking)], \
         buffers: [Buffer(\"a\", \"4 KiB\"), Buffer(\"b\", \"12 KiB\")], comms: [Comm(\"world\")], \
         threads: [Thread(\"main\", [{ops}])])"
    )
}

fn verdict(name: &str, text: &str, profile: &str) -> Vec<String> {
    kinds(&check_text(name, text, profile))
}

/// C1: a scatter's non-root part is one recv from the root: it ends once the root's part runs, whether or not the
/// other non-roots have issued theirs. Rank 1 waits for its part on the host before a barrier that rank 2 passes
/// before issuing its part: fine for a scatter, a hang for an all-to-all (every part needs every member). A first
/// collective of every rank sets the connections up (N7: otherwise the root's host blocks in set-up with rank 2).
#[test]
fn c1_scatter_non_root_needs_only_the_root() {
    let scatter = r#"Scatter(root: Rank(0), send: "b", recv: "a", stream: "s0")"#;
    let body = |coll: &str| {
        gpu3(&format!(
            r#"{coll}, DeviceSync,
               OnRanks([0], [{coll}, StreamSync("s0")]),
               OnRanks([1], [{coll}, StreamSync("s0"), Barrier("b")]),
               OnRanks([2], [Barrier("b"), {coll}, StreamSync("s0")])"#
        ))
    };
    assert_eq!(verdict("C1-scatter", &body(scatter), "portable"), Vec::<String>::new());
    let a2a = r#"AllToAll(send: "b", recv: "b", stream: "s0")"#;
    let r = check_text("C1-alltoall", &body(a2a), "portable");
    assert_eq!(kinds(&r), vec!["deadlock always"]);
    assert!(r.findings[0].text.contains("to issue its part (C1)"), "{}", r.findings[0].text);
}

/// C1: a gather's non-root part only sends to the root: within the eager window it may end before the root runs
/// (as a broadcast root may), so a host that waits for it before letting the root issue its part completes in some
/// executions; under `portable` it may also wait for the root (rendezvous, N2): a hang in others.
#[test]
fn c1_gather_non_root_may_end_before_the_root_runs() {
    let g = r#"Gather(root: Rank(0), send: "a", recv: "b", stream: "s0")"#;
    let t = gpu3(&format!(
        r#"{g}, DeviceSync,
           OnRanks([0], [Barrier("b"), {g}, StreamSync("s0")]),
           OnRanks([1, 2], [{g}, StreamSync("s0"), Barrier("b")])"#
    ));
    let v = verdict("C1-gather", &t, "portable");
    assert!(!v.is_empty() && v.iter().all(|k| k == "deadlock sometimes"), "{v:?}");
    // The root itself receives from every member: it never ends alone.
    let root_first = gpu3(&format!(
        r#"{g}, DeviceSync,
           OnRanks([0], [{g}, StreamSync("s0"), Barrier("b")]),
           OnRanks([1, 2], [Barrier("b"), {g}, StreamSync("s0")])"#
    ));
    assert_eq!(verdict("C1-gather-root", &root_first, "portable"), vec!["deadlock always"]);
}

/// C1: `ncclReduce` writes `recv` on the root only ("recvbuff is only used on rank root"): a kernel on another
/// stream reading `b` races with the reduce on the root, not on the other ranks.
#[test]
fn c1_reduce_writes_recv_only_on_the_root() {
    let t = gpu3(r#"Reduce(root: Rank(1), send: "a", recv: Slice("b", 0, "4 KiB"), stream: "s0"), Kernel("k", stream: "s1", reads: ["b"])"#);
    let r = check_text("C1-reduce", &t, "portable");
    assert_eq!(kinds(&r), vec!["data race always"]);
    assert!(r.findings[0].text.contains("on r1 b"), "{}", r.findings[0].text);
}

/// N8: `ncclCommSplit` is a collective call over the parent: every member of the parent must make it, those that
/// join nothing too (NCCL_SPLIT_NOCOLOR); the split communicator is then usable by its members.
#[test]
fn n8_comm_split_blocks_until_every_parent_member_calls_it() {
    let split = r#"CommSplit("world", new: "pair", color: 0, key: rank)"#;
    let use_it = r#"AllReduce(buf: "a", stream: "s0", comm: "pair")"#;
    let t = gpu3(&format!(r#"OnRanks([0, 1], [{split}, {use_it}, StreamSync("s0")])"#));
    let r = check_text("N8-split", &t, "portable");
    assert_eq!(kinds(&r), vec!["deadlock always"]);
    assert!(r.findings[0].text.contains("r2 never calls comm_split(world)"), "{}", r.findings[0].text);
    let ok = gpu3(&format!(r#"OnRanks([0, 1], [{split}, {use_it}, StreamSync("s0")]), OnRanks([2], [CommSplit("world")])"#));
    assert_eq!(verdict("N8-split-ok", &ok, "portable"), Vec::<String>::new());
}

/// The PyTorch dialect's `new_group` under an eagerly initialised default group is a split of `world` that every
/// rank makes (members or not): a rank that skips it leaves the others blocked (N8). Lazily initialised, only the
/// group's members create its communicator, at their first collective on it.
#[test]
fn p2_new_group_is_a_split_when_eager_and_a_member_init_when_lazy() {
    let prog = |init: &str, ops: &str| {
        format!(
            "Program(ranks: 3, torch: Torch(init: {init}), buffers: [Buffer(\"t\", \"4 KiB\")], threads: [Thread(\"main\", [InitProcessGroup, {ops}, CudaSynchronize])])"
        )
    };
    let all_call = r#"NewGroup("g", [0, 1]), If(rank < 2, [DistAllReduce("t", group: "g")])"#;
    assert_eq!(verdict("P2-eager", &prog("Eager", all_call), "portable"), Vec::<String>::new());
    assert_eq!(verdict("P2-lazy", &prog("Lazy", all_call), "portable"), Vec::<String>::new());
    let members_only = r#"If(rank < 2, [NewGroup("g", [0, 1]), DistAllReduce("t", group: "g")])"#;
    let r = check_text("P2-eager-skip", &prog("Eager", members_only), "portable");
    assert_eq!(kinds(&r), vec!["deadlock always"]);
    assert!(r.findings[0].text.contains("never calls comm_split(world)"), "{}", r.findings[0].text);
    assert_eq!(verdict("P2-lazy-skip", &prog("Lazy", members_only), "portable"), Vec::<String>::new());
}

/// The new-user trial of 2026-12-03: two ranks calling all-reduces on two communicators in opposite orders hang in
/// the first use's connection set-up (N7), and the fix offered was the one for sends and recvs ("group the send and
/// the recv to a peer ..."). A cycle through a collective's set-up now offers the collective fix.
#[test]
fn cross_communicator_collective_order_was_offered_the_send_recv_fix() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "1 MiB"), Buffer("y", "1 MiB")],
        comms: [Comm("a"), Comm("b")],
        threads: [Thread("main", [
            If(rank == 0, then: [AllReduce(buf: "x", stream: "s0", comm: "a"), AllReduce(buf: "y", stream: "s0", comm: "b")],
                else: [AllReduce(buf: "y", stream: "s0", comm: "b"), AllReduce(buf: "x", stream: "s0", comm: "a")]),
            StreamSync("s0"),
        ])])"#;
    let r = check_text("cross-comm-order", t, "portable");
    // Under portable the collectives connect at init or lazily (issue 30, item 3): lazily, the hosts hang in the
    // set-up; at init, the launches hang on the devices. Both are reported; the set-up one offers the fix.
    assert_eq!(kinds(&r), vec!["deadlock always", "deadlock always"], "{}", r.to_text());
    let text = &r.findings.iter().find(|f| f.text.contains("setting up connection")).expect("the set-up hang").text;
    assert!(text.contains("platform: only in executions with collective connections made lazily"), "{text}");
    // "In every execution" beside "only in executions with" read as a contradiction (issue 30 new-user trial).
    assert!(text.contains("with the other choice the program hangs elsewhere (N7)"), "{text}");
    assert!(text.contains("fix: every member must call each collective of a communicator"), "{text}");
    assert!(text.contains("in the same order"), "{text}");
    assert!(!text.contains("group the send and the recv"), "{text}");
}

/// The second trial of 2026-12-03: a cycle through stream order across two communicators (each communicator's
/// collectives in the same order on every member, the two communicators' in opposite orders on one stream) was
/// told only that "every member must issue a communicator's collectives in the same order", which it did.
#[test]
fn a_cycle_across_communicators_was_told_to_order_each_communicator() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "1 MiB"), Buffer("y", "1 MiB")],
        comms: [Comm("a"), Comm("b")],
        threads: [Thread("main", [
            AllReduce(buf: "x", stream: "s0", comm: "a"), AllReduce(buf: "y", stream: "s0", comm: "b"), StreamSync("s0"),
            If(rank == 0, then: [AllReduce(buf: "x", stream: "s0", comm: "a"), AllReduce(buf: "y", stream: "s0", comm: "b")],
                else: [AllReduce(buf: "y", stream: "s0", comm: "b"), AllReduce(buf: "x", stream: "s0", comm: "a")]),
            StreamSync("s0"),
        ])])"#;
    let r = check_text("cycle-across-comms", t, "portable");
    assert_eq!(kinds(&r), vec!["deadlock always"], "{}", r.to_text());
    assert!(r.findings[0].text.contains("when the cycle runs through several communicators"), "{}", r.findings[0].text);
}
