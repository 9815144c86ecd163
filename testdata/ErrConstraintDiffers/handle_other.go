//go:build !linux

package svc

type Handle string
