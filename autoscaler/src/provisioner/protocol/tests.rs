use super::*;

#[test]
fn status_needs_an_address_when_running_and_defaults_port_and_user() {
    let s = parse_status(br#"{"id":"a","state":"running","address":"10.0.0.1"}"#, "a").unwrap();
    assert_eq!((s.port, s.user.as_str()), (22, "root"));
    assert!(parse_status(br#"{"id":"a","state":"running"}"#, "a").is_err());
    assert!(parse_status(br#"{"id":"b","state":"gone"}"#, "a").is_err());
    let e = parse_status(br#"{"id":"a","state":"exploded"}"#, "a").unwrap_err();
    assert!(e.to_string().contains("exploded"), "{e}");
}

#[test]
fn garbage_and_trailing_output_are_refused() {
    assert!(parse_list(b"hello").is_err());
    assert!(parse_list(br#"{"machines":[]} extra"#).is_err());
    assert!(parse_list(br#"[1,2]"#).is_err());
    assert!(
        parse_list(br#"{"machines":[{"state":"running"}]}"#)
            .unwrap_err()
            .to_string()
            .contains("id")
    );
    assert_eq!(parse_list(b"  {\"machines\": []}\n").unwrap(), vec![]);
}

#[test]
fn a_machines_own_user_data_is_sent_only_when_it_has_one() {
    let plain = CreateItem {
        key: "k1".into(),
        labels: Labels::new(),
        user_data: None,
    };
    let json = serde_json::to_value(&plain).unwrap();
    assert!(json.get("user_data").is_none(), "{json}");
    let own = CreateItem {
        user_data: Some(crate::secret::Secret::new("#!/bin/sh\necho hi\n")),
        ..plain
    };
    let json = serde_json::to_value(&own).unwrap();
    assert_eq!(json["user_data"], "#!/bin/sh\necho hi\n");
    assert!(!format!("{own:?}").contains("echo hi"), "Debug hides it");
}

#[test]
fn create_answers_must_match_what_was_asked() {
    let asked = vec![CreateItem {
        key: "k1".into(),
        labels: Labels::new(),
        user_data: None,
    }];
    assert!(
        parse_created(
            br#"{"machines":[{"key":"k1","id":"i-1","state":"creating"}]}"#,
            &asked
        )
        .is_ok()
    );
    assert!(
        parse_created(
            br#"{"machines":[{"key":"k2","id":"i-1","state":"creating"}]}"#,
            &asked
        )
        .is_err()
    );
    assert!(
        parse_created(
            br#"{"machines":[{"key":"k1","id":"","state":"creating"}]}"#,
            &asked
        )
        .is_err()
    );
    assert!(
        parse_created(
            br#"{"machines":[{"key":"k1","id":"i","state":"gone"}]}"#,
            &asked
        )
        .is_err()
    );
}

#[test]
fn stop_and_start_answer_about_the_machine_asked_with_their_own_states() {
    assert_eq!(
        parse_stopped(br#"{"id":"a","state":"stopped"}"#, "a").unwrap(),
        StopAnswer::Stopped
    );
    assert_eq!(
        parse_started(br#"{"id":"a","state":"starting"}"#, "a").unwrap(),
        StartAnswer::Starting
    );
    assert_eq!(
        parse_started(br#"{"id":"a","state":"gone"}"#, "a").unwrap(),
        StartAnswer::Gone
    );
    let e = parse_stopped(br#"{"id":"b","state":"stopped"}"#, "a").unwrap_err();
    assert!(e.to_string().contains("answered about \"b\""), "{e}");
    // Each verb has its own states: a start cannot answer stopped, nor a stop running.
    let e = parse_started(br#"{"id":"a","state":"stopped"}"#, "a").unwrap_err();
    assert!(
        e.to_string().contains("start: unknown variant `stopped`"),
        "{e}"
    );
    assert!(parse_stopped(br#"{"id":"a","state":"running"}"#, "a").is_err());
}

#[test]
fn stop_start_is_off_unless_declared() {
    let plain = parse_info(br#"{"protocol":1,"name":"x","version":"1"}"#).unwrap();
    assert!(!plain.capabilities.stop_start);
    let declared = parse_info(
        br#"{"protocol":1,"name":"x","version":"1","capabilities":{"stop_start":true}}"#,
    )
    .unwrap();
    assert!(declared.capabilities.stop_start);
}

#[test]
fn a_status_may_report_a_stopped_or_starting_machine_without_an_address() {
    let s = parse_status(br#"{"id":"a","state":"stopped"}"#, "a").unwrap();
    assert_eq!((s.state, s.address), (ProviderState::Stopped, None));
    let s = parse_status(br#"{"id":"a","state":"starting"}"#, "a").unwrap();
    assert_eq!(s.state, ProviderState::Starting);
}

#[test]
fn info_must_speak_protocol_1() {
    assert!(parse_info(br#"{"protocol":1,"name":"x","version":"1"}"#).is_ok());
    assert!(parse_info(br#"{"protocol":2,"name":"x","version":"1"}"#).is_err());
    assert_eq!(
        parse_info(
            br#"{"protocol":1,"name":"x","version":"1","capabilities":{"batch_create":true}}"#
        )
        .unwrap()
        .capabilities
        .batch_size(),
        10
    );
}
