"""Errors raised by the IR layer. Each carries enough context (a source
location or an op) for the driver to print one line that says what and where."""


class TccError(Exception):
    """Base of every error tcc reports to a user as one line."""


class IRError(TccError):
    pass


class ParseError(IRError):
    def __init__(self, message, filename="<input>", line=0, col=0):
        self.filename, self.line, self.col, self.message = filename, line, col, message
        super().__init__(f"{filename}:{line}:{col}: {message}")


class VerifyError(IRError):
    def __init__(self, message, op=None):
        self.op = op
        where = ""
        if op is not None:
            where = f"'{op.name}'"
            if op.loc is not None and str(op.loc) != "loc(unknown)":
                where += f" at {op.loc}"
            where += ": "
        super().__init__(where + message)


class PassError(IRError):
    pass
