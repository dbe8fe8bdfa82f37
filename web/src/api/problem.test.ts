import { describe, expect, it } from "vitest";
import { ApiError, describeError, fieldErrorsByName, fieldName, problemFrom } from "./problem";

describe("problems", () => {
  it("maps JSON pointers to field names", () => {
    expect(fieldName({ pointer: "/name", detail: "x" })).toBe("name");
    expect(fieldName({ pointer: "/domain_join/password", detail: "x" })).toBe("domain_join.password");
    expect(fieldName({ pointer: "/query/limit", detail: "x", location: "query" })).toBe("limit");
    expect(fieldName({ pointer: "/credentials/a~1b", detail: "x" })).toBe("credentials.a/b");
  });

  it("joins several errors of one field", () => {
    const errors = fieldErrorsByName([
      { pointer: "/max_size", detail: "Too small." },
      { pointer: "/max_size", detail: "Must be at least min_size." },
      { pointer: "/name", detail: "Taken." },
    ]);
    expect(errors).toEqual({ max_size: "Too small. Must be at least min size.", name: "Taken." });
  });

  it("shows the problem's detail", () => {
    const error = new ApiError(
      problemFrom(422, { status: 422, title: "Invalid", detail: "The pool is invalid.", errors: [{ pointer: "/name", detail: "Required." }] }),
    );
    expect(describeError(error)).toBe("The pool is invalid.");
    expect(error.fieldErrors()).toEqual({ name: "Required." });
  });

  it("makes a problem of a body that is not problem+json", () => {
    const problem = problemFrom(502, "<html>bad gateway</html>", "Bad Gateway");
    expect(problem.status).toBe(502);
    expect(problem.title).toBe("Bad Gateway");
  });

  it("says the schema's messages in words, with no field keys", async () => {
    const { inWords } = await import("./problem");
    expect(inWords("Not a valid UUID.")).toBe("Choose one from the list.");
    expect(inWords("Length must be between 1 and 64.")).toBe("Use 1 to 64 characters.");
    expect(inWords("must not exceed max_size (3)")).toBe("It must not exceed max size (3)");
    expect(inWords("must be at least 1")).toBe("It must be at least 1.");
    expect(inWords("Missing data for required field.")).toBe("Fill this in.");
  });

  it("marks a name taken at the name field", () => {
    const error = new ApiError({ status: 409, code: "pool_name_taken", detail: "A pool named 'a' exists." });
    expect(error.fieldErrors()).toEqual({ name: "A pool named 'a' exists." });
  });
});
