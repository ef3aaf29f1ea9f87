package policy

// MaxEscaped is maxEscaped, for the external tests.
const MaxEscaped = maxEscaped
