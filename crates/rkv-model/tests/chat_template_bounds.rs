//! Hostile chat templates (a template comes with the model file) stop with a clear error,
//! quickly and in bounded memory: loops without end hit the step budget; templates that
//! print, capture, concatenate (`~`, `+`, `*`), `replace`, `join`, `format`, `indent` or
//! split their way to an exponential or quadratic string or list hit the size bounds; and
//! values nested as deep as the budget allows render on the rendering's own stack instead
//! of overflowing the caller's. Each case runs alone in this test binary's one test, and
//! its peak resident memory above the start is read from `/proc/self/status` (Linux).

use std::time::{Duration, Instant};

use rkv_model::chat_template::{ChatMessage, ChatTemplate, ChatTemplateError};

/// The peak resident set (`VmHWM`) in bytes, after resetting it when the kernel allows.
#[cfg(target_os = "linux")]
fn peak_rss(reset: bool) -> Option<u64> {
    if reset {
        // "5" resets the peak to the current resident size (Linux 4.0+).
        let _ = std::fs::write("/proc/self/clear_refs", "5");
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(not(target_os = "linux"))]
fn peak_rss(_reset: bool) -> Option<u64> {
    None
}

const CASES: [(&str, &str, &str); 32] = [
    (
        "nested loops without end",
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x",
        "budget of",
    ),
    (
        "a loop printing without end",
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ 'x' * 10000 }}{% endfor %}{% endfor %}",
        "more than",
    ),
    (
        "raw text repeated without end",
        "{% for i in range(100000) %}{% for j in range(100000) %}RAW{% endfor %}{% endfor %}",
        "more than",
    ),
    (
        "a macro doubling its output",
        "{% macro d(n) %}{% if n == 0 %}{{ 'x' * 1000 }}{% else %}{{ d(n - 1) }}{{ d(n - 1) }}{% endif %}{% endmacro %}{{ d(60) }}",
        "more than",
    ),
    (
        "a captured string doubling",
        "{% set ns = namespace(s='x' * 1000) %}{% for i in range(64) %}{% set t %}{{ ns.s }}{{ ns.s }}{% endset %}{% set ns.s = t %}{% endfor %}{{ ns.s }}",
        "more than",
    ),
    (
        "replace filter squaring a string",
        "{% set s = 'x' * 100000 %}{{ s | replace('', s) }}",
        "replace would build",
    ),
    (
        "replace method squaring a string",
        "{% set s = 'x' * 100000 %}{{ s.replace('x', s) }}",
        "replace would build",
    ),
    (
        "a string doubled by ~ in a loop",
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        "~ would build",
    ),
    (
        "a string doubled by + in a loop",
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
        "+ would build",
    ),
    (
        "a string doubled by a chain of sets",
        "{% set a = 'x' * 1000000 %}{% set b = a ~ a %}{% set c = b ~ b %}{% set d = c ~ c %}{% set e = d ~ d %}{{ e }}",
        "~ would build",
    ),
    (
        "a doubled list joined",
        "{% set ns = namespace(l=['xxxxxxxx']) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | join }}",
        "list of over",
    ),
    (
        "a list nesting itself, as JSON",
        "{% set ns = namespace(l=['xxxxxxxx']) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l | tojson }}",
        "tojson would build",
    ),
    (
        "a list nesting itself, as text",
        "{% set ns = namespace(l=['xxxxxxxx']) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l ~ '' }}",
        "~ would build",
    ),
    (
        "many large strings kept alive",
        "{% set ns = namespace(l=[]) %}{% set s = 'x' * 4000000 %}{% for i in range(1000) %}{% set ns.l = ns.l + [s ~ i] %}{% endfor %}{{ ns.l | length }}",
        "built more than",
    ),
    (
        "indent by a huge width",
        "{{ 'a\nb\nc' | indent(1000000000) }}",
        "indent would build",
    ),
    (
        "a string exploded into characters",
        "{{ ('x' * 4000000) | list | length }}",
        "list of over",
    ),
    (
        "a format string repeating its argument",
        "{% set s = 'x' * 1000000 %}{{ ('{0}' * 1000).format(s) }}",
        "format would build",
    ),
    // What a review found after the first version of the bounds.
    (
        "a constant expression minijinja would fold while compiling",
        "{{ 'x' * 100000000 ~ 'x' * 100000000 ~ 'x' * 100000000 }}",
        "* would build",
    ),
    (
        "a list repeated a billion times",
        "{{ ([0] * 1000000000) | last }}",
        "* would build a list",
    ),
    (
        "looking in a list repeated 10^18 times",
        "{{ 1 in [0] * 1000000000000000000 }}",
        "* would build a list",
    ),
    (
        "a printf width of 10^11",
        "{{ '%99999999999s' | format(1) }}",
        "format would build",
    ),
    (
        "a str.format width of 10^11",
        "{{ '{:>99999999999}'.format(1) }}",
        "format would build",
    ),
    (
        "indent's width given by name after none",
        "{{ ('a\n' * 1000) | indent(none, width=100000000) }}",
        "indent would build",
    ),
    (
        "a list of 2^40 leaves made upper case",
        "{% set ns = namespace(l=[0]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l | upper }}",
        "a filter would build",
    ),
    (
        "a list of 2^40 leaves looked for in a string",
        "{% set ns = namespace(l=[0]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l in 'a' }}",
        "in would build",
    ),
    (
        "slices of a large string kept alive",
        "{% set s = 'x' * 4000000 %}{% set ns = namespace(k=[]) %}{% for i in range(99999) %}{% set ns.k = ns.k + [s[i:]] %}{% endfor %}",
        "built more than",
    ),
    (
        "an exception carrying 2^40 leaves",
        "{% set ns = namespace(l=[0]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ raise_exception(ns.l) }}",
        "[[[[",
    ),
    // Values nested as deep as the step budget allows are printed, serialised and dropped
    // by recursion: they render (an empty expectation) on the rendering's own large stack.
    (
        "a list nested 100,000 deep, printed",
        "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
        "",
    ),
    (
        "a list nested 100,000 deep, as JSON",
        "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l | tojson }}",
        "",
    ),
    (
        "a map nested 60,000 deep, as indented JSON",
        "{% set ns = namespace(l={}) %}{% for i in range(60000) %}{% set ns.l = {'k': ns.l} %}{% endfor %}{{ ns.l | tojson(indent=8) }}",
        "nested deeper than",
    ),
    (
        "a list containing itself, as JSON without indent",
        "{% set ns = namespace(l=[]) %}{% set ns.l = [ns, 1] %}{{ ns.l | tojson(indent=0) }}",
        "nested deeper than",
    ),
    (
        "namespaces nested 100,000 deep, dropped",
        "{% set ns = namespace(n=none) %}{% for i in range(100000) %}{% set ns.n = namespace(n=ns.n) %}{% endfor %}done",
        "",
    ),
];

#[test]
fn hostile_templates_stop_fast_in_bounded_memory() {
    let messages = [ChatMessage::user("hi")];
    let start = peak_rss(true);
    // 4 KiB of raw text per iteration: the output bound comes before the step budget.
    let raw = "x".repeat(4096);
    for (what, source, expect) in CASES {
        let source = source.replace("RAW", &raw);
        let source = source.as_str();
        let before = peak_rss(true);
        let t0 = Instant::now();
        let result = ChatTemplate::new(source).and_then(|t| t.render(&messages, true, None, None));
        let took = t0.elapsed();
        let peak = peak_rss(false);
        let grew = match (before, peak) {
            (Some(b), Some(p)) => Some(p.saturating_sub(b)),
            _ => None,
        };
        let shown = match &result {
            Ok(text) => format!("Ok({} bytes)", text.len()),
            Err(e) => format!("{e:?}"),
        };
        println!(
            "{what}: {took:.2?}, peak RSS +{} MB: {shown}",
            grew.map_or("?".into(), |g| (g >> 20).to_string())
        );
        match result {
            _ if expect.is_empty() => {}
            Err(ChatTemplateError::Render(msg)) => {
                assert!(msg.contains(expect), "{what}: {msg}")
            }
            other => panic!("{what}: not a render error: {other:?}"),
        }
        assert!(took < Duration::from_secs(1), "{what}: took {took:?}");
        if let Some(g) = grew {
            assert!(g < 100 << 20, "{what}: peak RSS grew by {} MB", g >> 20);
        }
    }
    // Where the peak cannot be reset, the whole run's growth bounds each case's.
    if let (Some(s), Some(p)) = (start, peak_rss(false)) {
        println!("peak RSS over the run: +{} MB", p.saturating_sub(s) >> 20);
    }
}
