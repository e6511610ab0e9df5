package toolkit

// EstimateTokens estimates what the definitions of tools cost in a model's context: the bytes
// of each tool's name, description and compact argument schema, divided by 4 (the usual
// bytes-per-token of English and JSON for GPT and Claude tokenizers). It is a proxy for
// comparing and budgeting tool sets, not an exact count.
func EstimateTokens(tools []*Tool) int {
	n := 0
	for _, t := range tools {
		n += len(t.name) + len(t.description) + len(t.schema)
	}
	return (n + 3) / 4
}
