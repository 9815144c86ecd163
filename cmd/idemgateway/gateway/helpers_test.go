package gateway

import (
	"io"
	"log"
	"log/slog"
)

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// discardStdLog is a log.Logger that writes nothing, for a test server's
// ErrorLog.
func discardStdLog() *log.Logger { return log.New(io.Discard, "", 0) }
