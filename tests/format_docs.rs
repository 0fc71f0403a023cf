//! Keeps docs/program-format.md honest: every ```ron block loads (whole programs as they are, operation examples
//! inside the page's example context), and every operation of the format has an example.

use cuorder_model::format::load;

fn doc() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/program-format.md");
    std::fs::read_to_string(path).expect("docs/program-format.md")
}

/// The fenced blocks of `text` with the given info string, with the line each starts on.
fn blocks(text: &str, info: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim_start() == format!("```{info}") => current = Some((i + 2, String::new())),
            Some((start, body)) if line.trim_start() == "```" => {
                out.push((*start, std::mem::take(body)));
                current = None;
            }
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    out
}

/// The example context: the ```text block after the "The example context" heading.
fn context(text: &str) -> String {
    let after = &text[text.find("## The example context").expect("context section")..];
    let (_, body) = blocks(after, "text").into_iter().next().expect("context block");
    assert!(body.contains("/* the example */"));
    body
}

#[test]
fn every_ron_block_loads() {
    let text = doc();
    let ctx = context(&text);
    let ron = blocks(&text, "ron");
    assert!(ron.len() >= 15, "found only {} ron blocks", ron.len());
    for (line, body) in ron {
        let program = if body.contains("Program(") { body.clone() } else { ctx.replace("/* the example */", &body) };
        if let Err(diags) = load("doc", &program) {
            panic!(
                "docs/program-format.md, block at line {line} does not load:\n{}",
                cuorder::diagnostics::render("block", &program, &diags, false)
            );
        }
    }
}

#[test]
fn every_operation_has_an_example() {
    let text = doc();
    let examples: String = blocks(&text, "ron").into_iter().map(|(_, b)| b).collect();
    for op in [
        "Kernel(", "Memset(", "Memcpy(", "Record(", "Wait(", "EventQuery(", "EventSync(", "StreamSync(", "StreamQuery(",
        "DeviceSync", "Sleep(", "HostRead(", "HostWrite(", "Barrier(", "CommInit(", "Send(", "Recv(", "GroupStart",
        "GroupEnd", "Group([", "AllReduce(", "Broadcast(", "AllGather(", "ReduceScatter(", "Alloc(", "Free(",
        "RecordStream(", "OnRanks(", "Parity(even: [", "Repeat(", "Slice(", "to: Next", "from: Prev", "Rank(",
        "Parity(even: Next", "For(", "If(stage", "then: [", "Rank(stage + 1)", "{i}", "Expect(", "written_by: Kernel(",
        "InitProcessGroup", "DistSend(", "DistRecv(", "Isend(", "Irecv(", "BatchIsendIrecv(", "P2POp(", "WorkWait(",
        "DistAllReduce(", "DistBroadcast(", "DistAllGather(", "DistReduceScatter(", "AllToAll(", "Reduce(", "Gather(", "Scatter(", "CommSplit(", "NewGroup(",
        "DistAllToAllSingle(", "input_split_sizes: [", "output_split_sizes: [", "DistAllToAll(outputs: [", "DistAllGatherList(tensor_list: [", "DistReduceScatterList(output: ", "avoid_record_streams: true", "DistReduce(", "DistGather(", "DistScatter(", "group: ", "CudaSynchronize", "WithStream(", "Compute(", "RecordEvent(", "WaitEvent(", "Empty(", "Del(", "DistBarrier",
        "Malloc(", "MallocHost(", "LoadModule(", "HostFunc(", "calls_cuda: true", "EmptyCache",
        "DistAllToAllSingle(", "DistReduce(", "DistGather(", "DistScatter(", "group: ", "Poll(", "CommAbort(", "DestroyProcessGroup", "timeout: \"30 s\"", "CommFinalize(", "CommDestroy(", "config: NonBlocking", "CudaSynchronize", "WithStream(", "Compute(", "RecordEvent(", "WaitEvent(", "Empty(", "Del(", "DistBarrier",
    ] {
        assert!(examples.contains(op), "no example uses `{op}`");
    }
}
