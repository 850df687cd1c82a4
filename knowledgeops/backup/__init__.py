"""Backups and moving an installation: the archive format (`archive`), where archives live and
which retention lets go (`store`, `retention`), the database dump, one-file exports (`export`),
restore, and copying a data folder into STORAGE_URL (`storage_upload`)."""
