#!/usr/bin/env bash
exec "$(dirname "${BASH_SOURCE[0]}")/../run-class.sh" 'org.apache.kafka.tools.TransactionsCommand' "$@"
