"""The ground floor: enums, the error type, the bounded JSON reader and the file-access rules. Imports nothing of ours."""
