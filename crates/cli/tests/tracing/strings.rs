//! String arguments of functions (`@argN/s`) recorded as text: cut at
//! --string-max and marked, empty, or null.

use crate::support::*;

// `@arg1/s` records a string argument's text: cut at --string-max bytes
// and marked, empty, or null, each as often as the target passed it.
variant_test!(function_string_arguments_are_recorded_as_text, |v| {
    let traced = trace_run(
        &format!("trace-strings-{}", v.name),
        &["--trace", "entry:labelled@arg1/s", "--string-max", "16"],
        build("events", v),
        &["1", "10"],
    );
    let (tally, text) = (traced.tallies(), traced.text());
    let shown = |value: &str| {
        lines_with_all(&text, &[":labelled entry ", &format!("arg1={value} ")]) as u64
    };
    assert_eq!(
        shown("\"alpha\""),
        tally["label_word"],
        "{}: {text}",
        v.name
    );
    assert_eq!(shown("\"\""), tally["label_empty"], "{}", v.name);
    assert_eq!(
        shown("\"0123456789abcdef\"..."),
        tally["label_long"],
        "{}",
        v.name
    );
    assert_eq!(shown("(null)"), tally["label_null"], "{}", v.name);
    assert_eq!(tally["label_null"], 10);
});
