//! docs/events.schema.json compiled for validation, formats checked: shared by the unit tests
//! (`events::tests::schema`) and the end-to-end tests (`tests/common/agent.rs` includes this file),
//! built into the binaries as the VM guests have no checkout.

/// The compiled schema.
pub fn events_schema() -> jsonschema::Validator {
    let schema = serde_json::from_str(include_str!("../../../../docs/events.schema.json"))
        .expect("docs/events.schema.json is JSON");
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("docs/events.schema.json is a valid draft 2020-12 schema")
}
