package toolkit

//go:generate go run ./internal/genschemas -out ../schemas
