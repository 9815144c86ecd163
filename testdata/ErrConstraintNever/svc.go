package svc

type Service struct{}
