package store_test

import (
	"errors"
	"strconv"
)

func itoa(n int) string { return strconv.Itoa(n) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }
