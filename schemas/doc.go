// Package schemas turns Go argument structs into the JSON Schemas a model sees and checks
// the arguments a model sends back against them.
//
// Three jobs live here:
//
//   - [Reflect] derives a small, inline schema from a struct with the house settings: the root
//     is an object with no $ref, $defs, $schema or $id (every byte is a token the model pays for),
//     additionalProperties is false on every struct, field descriptions come from struct tags,
//     and a field is required unless it is a pointer or tagged omitempty/omitzero.
//   - [Strict] rewrites a schema into the form OpenAI's strict mode accepts, and reports the
//     parts that cannot be strict so the caller can send that tool with strict off.
//   - [Validator] checks model-sent arguments and turns every violation into a sentence the
//     model can act on (which field, what was expected, what was given); [Decode] validates and
//     then decodes into the Go type.
//
// Threat model: arguments come from a model and are untrusted. They may be malformed, huge,
// deeply nested or adversarial. Decoding never panics (fuzzed), never accepts fields the Go
// type does not declare, and reports problems instead of guessing. Validation limits shape,
// not meaning: paths, commands and sizes are still checked by the code that uses them.
//
// [WriteFile] and [CompareFile] keep generated schema files (schemas/*.json) byte-stable so a
// test can fail when they are stale.
package schemas
