package main

import (
	"io"
)

func cmdDemo(args []string, stdout, stderr io.Writer) error {
	return usageError{"demo: not yet"}
}
