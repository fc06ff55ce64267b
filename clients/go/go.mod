module github.com/django-jobqueue/django-jobqueue/clients/go

go 1.19
