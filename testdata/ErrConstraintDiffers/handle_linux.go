package svc

type Handle int
