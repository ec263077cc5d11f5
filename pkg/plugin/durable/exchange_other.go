//go:build !linux

package durable

// exchange is Linux's; elsewhere ReplaceFile renames.
func exchange(_, _ string) error { return errNoExchange }
