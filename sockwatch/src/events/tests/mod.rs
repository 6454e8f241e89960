//! The event stream against its published JSON Schema (docs/events.schema.json): every
//! line kind `run` writes, and every example line of the docs.
mod schema;
mod schema_validator;
