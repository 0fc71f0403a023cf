//! Snapshot tests of how program errors are reported: every bad input below is loaded, and its rendered
//! diagnostics (file:line:column line, source snippet, labels, help) are compared with the committed snapshot.

use cuorder::diagnostics::render;
use cuorder_model::format::load;

/// Loads `text` as `file`, expects it to fail, and returns the rendered diagnostics without colors.
fn rendered(file: &str, text: &str) -> String {
    match load(file, text) {
        Ok(_) => panic!("{file} loaded, but it should have errors"),
        Err(diags) => render(file, text, &diags, false),
    }
}

#[test]
fn truncated_file() {
    let text = r#"// Two ranks exchange a buffer.
Program(
    ranks: 2,
    streams: [Stream("s0", NonBlocking)],
    buffers: [Buffer("x", "1 MiB"), Buffer("y", "1 MiB")],
    comms: [Comm("world")],
    threads: [
        Thread("main", [
            Send(to: Next, buf: "x", stream: "s0"),
            Recv(from: Prev, buf: "y","#;
    insta::assert_snapshot!(rendered("truncated.ron", text));
}

#[test]
fn misspelled_op_variant() {
    let text = r#"Program(
    ranks: 1,
    streams: [Stream("s0", NonBlocking)],
    buffers: [Buffer("a", "4 KiB")],
    threads: [Thread("main", [
        Kernal("fwd", stream: "s0", writes: ["a"]),
    ])],
)
"#;
    insta::assert_snapshot!(rendered("misspelled.ron", text));
}

/// Regression: the unknown operation stopped loading, and was the only error shown; the unknown stream before it and
/// the unknown buffer after it are now shown with it, in file order.
#[test]
fn misspelled_op_variant_does_not_hide_the_other_errors() {
    let text = r#"Program(
    ranks: 2,
    streams: [Stream("s0", NonBlocking)],
    buffers: [Buffer("x", "1 MiB")],
    comms: [Comm("world")],
    threads: [
        Thread("main", ops: [
            Kernel("k", stream: "s9", writes: ["x"]),
            Kernal("k2", stream: "s0", writes: ["x"]),
            Kernel("k3", stream: "s0", writes: ["zz"]),
        ]),
    ],
)
"#;
    insta::assert_snapshot!(rendered("misspelled_among_others.ron", text));
}

#[test]
fn unknown_stream_name() {
    let text = r#"Program(
    ranks: 1,
    streams: [Stream("compute", NonBlocking), Stream("copy", NonBlocking)],
    buffers: [Buffer("a", "4 KiB")],
    threads: [Thread("main", [
        Kernel("fwd", stream: "compte", writes: ["a"]),
        StreamSync("compute"),
    ])],
)
"#;
    insta::assert_snapshot!(rendered("unknown_stream.ron", text));
}

#[test]
fn recv_count_mismatch() {
    let text = r#"// Rank 0 sends 1 MiB, rank 1 expects 2 MiB: a recv larger than its send waits forever.
Program(
    ranks: 2,
    streams: [Stream("s0", NonBlocking)],
    buffers: [Buffer("x", "1 MiB"), Buffer("y", "2 MiB")],
    comms: [Comm("world")],
    threads: [Thread("main", [
        OnRanks([0], [Send(to: Rank(1), buf: "x", stream: "s0")]),
        OnRanks([1], [Recv(from: Rank(0), buf: "y", stream: "s0")]),
        StreamSync("s0"),
    ])],
)
"#;
    insta::assert_snapshot!(rendered("recv_mismatch.ron", text));
}

#[test]
fn event_recorded_on_another_device() {
    let text = r#"// One process drives both GPUs. An event belongs to the device it was created on (S3).
Program(
    ranks: 2,
    streams: [Stream("s0", NonBlocking)],
    events: ["e"],
    threads: [Thread("driver", ranks: [0], ops: [
        Record("e", stream: "s0@1"),
        Wait("e", stream: "s0"),
    ])],
)
"#;
    insta::assert_snapshot!(rendered("event_other_device.ron", text));
}

#[test]
fn unbalanced_groups() {
    let text = r#"Program(
    ranks: 2,
    streams: [Stream("s0", NonBlocking)],
    buffers: [Buffer("x", "1 MiB"), Buffer("y", "1 MiB")],
    comms: [Comm("world")],
    threads: [Thread("main", [
        GroupEnd,
        GroupStart,
        Send(to: Next, buf: "x", stream: "s0"),
        Recv(from: Prev, buf: "y", stream: "s0"),
    ])],
)
"#;
    insta::assert_snapshot!(rendered("unbalanced_groups.ron", text));
}

#[test]
fn several_errors_at_once() {
    let text = r#"// Several independent mistakes: all are reported, in source order.
Program(
    ranks: 2,
    streams: [Stream("s0", NonBlocking), Stream("s0", Blocking)],
    events: ["e"],
    buffers: [Buffer("x", "4 KiB"), Buffer("p", "4 KiB", space: PinnedHost), Buffer("bad", "3 parsecs")],
    comms: [Comm("world")],
    threads: [Thread("main", [
        Kernel("k", stream: "s0", writes: [Slice("x", "2 KiB", "4 KiB")]),
        HostRead("x"),
        Memcpy(dst: "p", src: Slice("x", 0, "1 KiB"), stream: "s0"),
        Wait("ev", stream: "s0"),
        Parity(even: [AllReduce(buf: "x", stream: "s0")], odd: [AllReduce(buf: Slice("x", 0, "1 KiB"), stream: "s0")]),
        Sleep("2 weeks"),
    ])],
)
"#;
    insta::assert_snapshot!(rendered("several.ron", text));
}

#[test]
fn first_line_of_each_diagnostic_is_file_line_column_message() {
    let text = "Program(ranks: 0, threads: [])";
    let out = rendered("zero.ron", text);
    assert!(out.starts_with("zero.ron:1:16: a program has 1 to 4096 ranks, not 0\n"), "{out}");
    let colored = render("zero.ron", text, &load("zero.ron", text).unwrap_err(), true);
    assert!(colored.contains('\u{1b}'), "color output uses ANSI escapes");
}

#[test]
fn pipeline_neighbour_past_the_last_stage() {
    let text = r#"// A pipeline is not a ring: the last stage has no next stage, so its send needs a guard.
Program(
    ranks: 4,
    streams: [Stream("s0", NonBlocking)],
    buffers: [Buffer("act", "4 MiB")],
    comms: [Comm("world")],
    threads: [Thread("main", [
        For(i, 0..4, [
            If(stage > 0, [Recv(from: Rank(stage - 1), buf: Slice("act", "{i} MiB", "1 MiB"), stream: "s0")]),
            Kernel("fwd{i}", stream: "s0", writes: [Slice("act", "{i} MiB", "1 MiB")]),
            Send(to: Rank(stage + 1), buf: Slice("act", "{i} MiB", "1 MiB"), stream: "s0"),
        ]),
        For(j, 0..n, []),
    ])],
)
"#;
    insta::assert_snapshot!(rendered("pipeline.ron", text));
}

#[test]
fn torch_dialect_errors_point_at_the_python_calls() {
    let text = r#"// Megatron's batched exchange, with two slips: the wait names a request that does not exist, and the last
// stage sends to a stage past the end of the pipeline.
Program(
    ranks: 2,
    buffers: [Buffer("act", "16 MiB"), Buffer("grad", "16 MiB")],
    threads: [Thread("main", [
        InitProcessGroup,
        BatchIsendIrecv([P2POp(Isend, "act", Rank(stage + 1)), P2POp(Irecv, "grad", Prev)], works: "reqs"),
        WorkWait("req"),
    ])],
)
"#;
    insta::assert_snapshot!(rendered("torch.ron", text));
}

#[test]
fn host_function_and_free_errors() {
    let text = r#"Program(
    ranks: 1,
    streams: [Stream("s0", NonBlocking)],
    buffers: [Buffer("a", "4 KiB"), Buffer("p", "4 KiB", space: PinnedHost)],
    threads: [Thread("main", [
        HostFunc("log", stream: "s0", reads: ["a"]),
        Free("p"),
        Malloc("many bytes"),
    ])],
)
"#;
    insta::assert_snapshot!(rendered("host_calls.ron", text));
}

/// Regression (issue 10 review): only the first mismatching collective of a communicator was reported, and a size
/// computed from the rank gave one error per rank. Now every independent mismatch shows at once, and the per-rank
/// variants of one error are one diagnostic listing each rank's value.
#[test]
fn collective_mismatches_all_at_once_with_per_rank_values_merged() {
    let text = r#"Program(ranks: 4, streams: [Stream("s", NonBlocking)], buffers: [Buffer("x", "1 MiB")],
  comms: [Comm("c", [0, 1, 2, 3])],
  threads: [Thread("main", [
    If(rank == 0, then: [AllReduce(buf: "x", stream: "s", comm: "c")], else: [Broadcast(root: Rank(0), buf: "x", stream: "s", comm: "c")]),
    AllReduce(buf: Slice("x", 0, "{rank + 1} KiB"), stream: "s", comm: "c"),
    DeviceSync])])
"#;
    insta::assert_snapshot!(rendered("mismatch.ron", text));
}

/// A member with one collective too many is reported once, not at every later position.
#[test]
fn an_extra_collective_is_reported_once() {
    let text = r#"Program(ranks: 2, streams: [Stream("s", NonBlocking)], buffers: [Buffer("x", "1 MiB"), Buffer("y", "2 MiB")],
  comms: [Comm("c")],
  threads: [Thread("main", [
    If(rank == 1, then: [AllReduce(buf: "y", stream: "s", comm: "c")]),
    AllReduce(buf: "x", stream: "s", comm: "c"),
    Broadcast(root: Rank(0), buf: "x", stream: "s", comm: "c"),
    AllReduce(buf: "y", stream: "s", comm: "c"),
    DeviceSync])])
"#;
    let out = rendered("extra.ron", text);
    assert_eq!(out.lines().filter(|l| l.starts_with("extra.ron:")).count(), 1, "{out}");
    assert!(out.contains("this rank calls one collective more on `c` than rank 0, here"), "{out}");
}

/// Per-rank sizes that differ only in numbers are one error (AllToAll sizes of 1, 2, 3 MiB on ranks 0-2).
#[test]
fn per_rank_size_errors_are_one_diagnostic() {
    let text = r#"Program(ranks: 4, streams: [Stream("s", NonBlocking)], buffers: [Buffer("y", "4 MiB")],
  comms: [Comm("c")],
  threads: [Thread("main", [AllToAll(send: "y", recv: Slice("y", 0, "{rank + 1} MiB"), stream: "s", comm: "c"), DeviceSync])])
"#;
    let out = rendered("a2a.ron", text);
    assert_eq!(out.matches("×").count(), 1, "{out}");
    assert!(out.contains("ranks 0-2: AllToAll sizes do not fit: send is 4194304 bytes, recv is 1048576 / 2097152 / 3145728 bytes"), "{out}");
}

/// A file that starts with a UTF-8 byte-order mark loads (it failed at 1:1 with "expected opening ( for struct
/// Program"), and an error in it is placed by the columns an editor shows, which do not count the mark.
#[test]
fn byte_order_mark_failed_at_1_1() {
    let good = "\u{feff}Program(ranks: 1, threads: [Thread(\"main\", [Sleep(\"1 us\")])])\n";
    assert!(cuorder::load_program_text("bom.ron", "bom", good, false).is_ok());
    let bad = "\u{feff}Program(ranks: 1, threads: [Thread(\"main\", [Slep(\"1 us\")])])\n";
    let e = cuorder::load_program_text("bom.ron", "bom", bad, false).unwrap_err();
    assert_eq!((e.issues[0].line, e.issues[0].column), (Some(1), Some(45)), "{}", e.rendered);
}
